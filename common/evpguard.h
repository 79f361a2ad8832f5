/*
 * evpguard.h - no libcrypto digest being set up when this process forks.
 *
 * OpenSSL 3 takes locks of its own when a digest is set up (the method
 * store's, fetching "SHA256" for EVP_DigestInit_ex) and, by design,
 * registers no fork handler that would release them. A fork made while
 * another thread holds one gives the child a lock that nobody will ever
 * release: the child's next set-up that needs it waits for ever. The daemon
 * forks workers (and its spawner) from its main loop while its API threads
 * check credentials with SHA-256, and a worker sets up a digest for every
 * file it verifies with Checksum=sha256 or md5.
 *
 * Owns: one process-wide count of set-ups in flight, and the fork handlers
 * (pthread_atfork, registered at the first evpguard_enter) that make a fork
 * wait until it is zero and start the child with it zero.
 * Must never: be held across anything but libcrypto calls (a fork in any
 * thread waits for it), or be linked into the SPANK plugin (slurmstepd's
 * forks are not ours to hold).
 */
#ifndef STAGEHAND_EVPGUARD_H
#define STAGEHAND_EVPGUARD_H

/* Around a libcrypto call that may fetch or set up a digest. Waits while a
   fork is being made. */
void evpguard_enter(void);
void evpguard_leave(void);

#endif
