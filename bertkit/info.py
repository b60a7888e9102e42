"""The old address of `bertkit info` (bertkit/commands/info.py) and of the model-folder checks (model_dir.py), for
one release."""

from .deprecated import moved

__getattr__ = moved(
    __name__,
    {
        "info_main": "bertkit.commands.info:main",
        "InfoConfig": "bertkit.commands.info:InfoConfig",
        "check_model_folder": "bertkit.model_dir:check_model_folder",
        "not_a_model": "bertkit.model_dir:not_a_model",
        "NotAModelError": "bertkit.model_dir:NotAModelError",
        "GET_A_MODEL": "bertkit.model_dir:GET_A_MODEL",
    },
)
