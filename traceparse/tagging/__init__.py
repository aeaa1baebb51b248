"""Which parallelism strategy each communication operation serves, and the job's layout."""
