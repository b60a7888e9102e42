"""The old address of bertkit.train.runlog (a run folder's log files), for one release."""

from ..deprecated import moved

__getattr__ = moved(
    __name__,
    {
        "RunLog": "bertkit.train.runlog:RunLog",
        "LOGGERS": "bertkit.train.runlog:LOGGERS",
        "CSV_HEADER": "bertkit.train.runlog:CSV_HEADER",
        "check_log_to": "bertkit.train.runlog:check_log_to",
        "summary_writer": "bertkit.train.runlog:summary_writer",
        "numbers": "bertkit.train.runlog:numbers",
        "append_row": "bertkit.train.runlog:append_row",
        "append_csv": "bertkit.train.runlog:append_csv",
        "read_metrics": "bertkit.train.runlog:read_metrics",
        "truncate_metrics": "bertkit.train.runlog:truncate_metrics",
        "truncate_csv": "bertkit.train.runlog:truncate_csv",
        "is_loss": "bertkit.train.runlog:is_loss",
        "eval_curves": "bertkit.train.runlog:eval_curves",
        "loss_figure": "bertkit.train.runlog:loss_figure",
        "plot_losses": "bertkit.train.runlog:plot_losses",
    },
)
