"""Tests of explorer.practice: questions from seeds, answered by the replay."""
