"""Images in requests: where they come from, which formats are opened, how they are normalised."""
