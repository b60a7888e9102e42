"""Label conventions shared by the data collators (which build labels) and the heads (whose losses
read them). Nothing here imports torch or the model.

    IGNORE = -100   a label position that takes no part in a loss (torch's CrossEntropyLoss default)
"""

IGNORE = -100
