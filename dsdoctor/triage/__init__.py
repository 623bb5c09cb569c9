"""Many jobs in one process (issue 22, item 4): find each job's files, analyze them, count the
causes across jobs, keep a history (``dsdoctor triage``)."""
