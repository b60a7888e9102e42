"""Text data: built-in corpora, pretraining examples and masking, and the records task readers share."""
