"""Rules and selection (`rules.py`), inserting records (`insert.py`, CTA sampling in
`sampling.py`), stripping them (`strip.py`), over files and trees (`trees.py`), compared with
golden output (`golden.py`). Runs no compiler: inlining callees is passed in.
"""
