"""Orchestration: the plan (every endpoint, caps decision and request made once), the pipeline, one job
(execute), the sweep's prompt schedule (prompt_cache), the paper CLI's responses, the headline and progress."""
