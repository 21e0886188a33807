"""What happens around one model call: committing its answer to the layers, and running tool handlers."""
