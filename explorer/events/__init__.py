"""KV events over ZMQ in vLLM 0.31.0's wire format: decoding, subscriber state, sockets, the CLI."""
