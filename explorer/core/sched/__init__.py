"""The scheduler side of the core: vLLM's Scheduler, AsyncScheduler and engine loop, and the manager calls they make."""
