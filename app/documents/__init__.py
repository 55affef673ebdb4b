"""Documents attached to a message: extraction (extract.py), the message block (block.py), bounds
(limits.py) and passages for documents too big for the context (retrieval.py). Qt-free."""
