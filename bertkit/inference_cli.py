"""The old address of evaluate / predict from settings (evaluation.py) and of their commands (commands/), for one
release."""

from .deprecated import moved

__getattr__ = moved(
    __name__,
    {
        "InferenceOptions": "bertkit.evaluation:InferenceOptions",
        "EvaluateConfig": "bertkit.evaluation:EvaluateConfig",
        "PredictConfig": "bertkit.evaluation:PredictConfig",
        "run_evaluate": "bertkit.evaluation:run_evaluate",
        "run_predict": "bertkit.evaluation:run_predict",
        "no_task_head": "bertkit.evaluation:no_task_head",
        "MLM_ARCHITECTURES": "bertkit.evaluation:MLM_ARCHITECTURES",
        "TASK_DATA_SUFFIXES": "bertkit.evaluation:TASK_DATA_SUFFIXES",
        "evaluate_main": "bertkit.commands.evaluate:main",
        "predict_main": "bertkit.commands.predict:main",
        "FillMaskConfig": "bertkit.commands.fill_mask:FillMaskConfig",
        "fill_mask_main": "bertkit.commands.fill_mask:main",
    },
)
