"""Text data: built-in corpora now; pretraining examples, masking and task readers later."""
