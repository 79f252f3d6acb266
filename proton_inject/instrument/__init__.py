"""Rules, selection and inserting records into TTGIR text (insert, strip, diff over trees).
"""
