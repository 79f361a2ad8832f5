/*
 * slurm_nodes.h - where slurmctld says a job runs (or ran), as network
 * addresses, to authorise job-start and job-end events that arrive over
 * TCP (docs/security.md "Job events").
 *
 * Owns: a small cache of job -> node addresses (slurm_load_job, hostlist
 * expansion, each node's NodeAddr from slurm_load_node, resolved), with a
 * short TTL, and the lookups behind it, done by a helper thread so that the
 * API thread waits at most the caller's budget. slurmctld sees at most one
 * job query per job per TTL and one node table query per NODE_TTL, and only
 * when events come over TCP.
 *
 * A peer address is "this host" when it is a loopback address or one of
 * this host's interface addresses; such a peer matches a job whose nodes
 * include an address of this host (a node on the daemon's own host, as on
 * a one-node cluster).
 *
 * libslurm must be initialised (SlurmWatch=yes does that at startup); the
 * cache needs no set-up. A lookup still running at shutdown is abandoned.
 *
 * Must never: block the caller past its budget, trust anything but
 * slurmctld's word and the kernel's peer address, or grow without bound.
 */
#ifndef STAGEHAND_SLURM_NODES_H
#define STAGEHAND_SLURM_NODES_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

enum snodes_verdict {
	SNODES_YES = 0,      /* peer is the address of one of the job's nodes */
	SNODES_NO,           /* slurmctld knows the job; peer is none of its nodes */
	SNODES_NOJOB,        /* slurmctld does not know the job (never, or purged) */
	SNODES_UNKNOWN,      /* no answer in time, or an error: try again later */
};

/*
 * Is peer (the TCP connection's remote address) a node where job_id runs or
 * ran? Waits for slurmctld at most timeout_ms. why says what was found, for
 * the log and the refusal message.
 */
enum snodes_verdict snodes_check(uint32_t job_id, const struct sockaddr *peer,
				 socklen_t peerlen, int timeout_ms, char *why, size_t whylen);

/* 1 if addr is a loopback address or one of this host's own addresses. */
int snodes_is_local(const struct sockaddr *addr);

#endif /* STAGEHAND_SLURM_NODES_H */
