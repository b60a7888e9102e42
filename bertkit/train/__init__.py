"""One training loop for pretraining and fine-tuning (loop.py), and the runs built on it."""
