"""Scripts that run inside the vLLM virtualenvs and drive vLLM's own classes: the reference the conformance tier and `bench` compare with."""
