"""From raw launches to answers: decode, clocks, record cost, traces, the summary, text and plots.
One pipeline (``report.run_report``) serves both the end of a run and ``report``.
"""
