"""Context for chat apps: a budgeted, de-duplicated, cited context from a question or a conversation."""
