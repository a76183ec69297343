"""Immutable expression nodes (one task per output block when lowered) and the tokenizer."""
