"""Rules (`rules.py`) and selecting regions by them (`select.py`: kernel scope, loops, ops;
`line_ranges.py`, `marks.py`; a region is `regions.py`), inserting records (`insert.py`, CTA
sampling in `sampling.py`), stripping them (`strip.py`), over files and trees (`trees.py`),
compared with golden output (`golden.py`). Runs no compiler: inlining callees is passed in.
"""
