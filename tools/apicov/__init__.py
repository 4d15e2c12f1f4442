"""Measures how much of torch's public API jitorch has, and whether a smoke call of each entry matches torch.

``tools/api_coverage.py`` is the command; this package holds its parts: the list of entries
(``universe``), the conversion and comparison of results (``compare``), the smoke calls of functions and
Tensor methods (``calls``) and of modules, optimizers, schedulers and autograd (``libraries``), the
crash-isolating runner (``runner``) and the Markdown report (``report``)."""
