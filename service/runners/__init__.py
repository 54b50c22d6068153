"""Starting and supervising the vLLM runner processes."""
