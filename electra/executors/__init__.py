"""Where runs run: this machine's processes or a SLURM cluster, behind one small interface.

A study's pretraining runs and a GLUE sweep's (task, seed) runs are `Job`s: a key, a module-level function and
its arguments, and a `done()` that reads the output folder. An executor's `run(jobs)` does every job not done yet
and returns the jobs that ended without their result:

    jobs.py     Job, JobFailure, JobsFailed, the Executor protocol
    local.py    LocalExecutor (in this process, or a pool of spawned processes that stop with this one) and the
                sweep's worker processes
    slurm.py    SlurmOptions, what one job asks for, submitit's executor, the job functions' requeue rules
    partition.py  what the partition offers (sinfo) and the options fitted to it, or refused
    queue.py    what the queue says of each job (squeue): state, pending reason, which reasons cannot resolve
    book.py     OUT/slurm/jobs.json: each run's job id, and the intent recorded before sbatch
    follow.py   SlurmExecutor: submit each run once (under the folder's lock), then follow the jobs until they leave

The output folder stays the one source of truth: an executor never carries results, the runs write them.
"""
