/* executor.c - see executor.h. */
#include "config.h"

#include "executor.h"
#include "worker.h"

static int _local_start(struct daemon *d, struct queue_request *r)
{
	return worker_pool_start(d->pool, r) < 0 ? -1 : 1;
}

const struct executor executor_local = { "local", _local_start };

static const struct executor *const _order[] = { &executor_mover, &executor_local };

int executor_start(struct daemon *d, struct queue_request *r)
{
	for (size_t i = 0; i < sizeof(_order) / sizeof(_order[0]); i++) {
		int rc = _order[i]->start(d, r);

		if (rc != 0)
			return rc < 0 ? -1 : 0;
	}
	return 0;	/* not reached: local takes every request */
}
