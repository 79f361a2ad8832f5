/*
 * slurm_watch.h - the lifecycle hook that stages inputs of jobs held at
 * submit time and releases them (see slurm_watch.c).
 */
#ifndef STAGEHAND_SLURM_WATCH_H
#define STAGEHAND_SLURM_WATCH_H

#include "lifecycle.h"

extern const struct lifecycle_hook slurm_watch_hook;

#endif /* STAGEHAND_SLURM_WATCH_H */
