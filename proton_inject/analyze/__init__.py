"""From raw launches to answers: buffers -> events (``decode``), cycles -> ns (``clock``),
traces (``trace``), per-kernel numbers (``summary``), the table (``text``) and the picture
(``plot``). One pipeline (``report.run_report``) serves both the end of a run and ``report``.
"""
