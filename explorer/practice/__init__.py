"""Practice mode: questions generated from seeds, answered by the replay, explained from its records."""
