"""The old address of `bertkit explain` and `bertkit attention` (bertkit/commands/), for one release."""

from ..deprecated import moved

__getattr__ = moved(
    __name__,
    {
        "Source": "bertkit.commands.explain:Source",
        "ExplainError": "bertkit.explain.common:ExplainError",
        "ExplainConfig": "bertkit.commands.explain:ExplainConfig",
        "explain_main": "bertkit.commands.explain:main",
        "AttentionConfig": "bertkit.commands.attention:AttentionConfig",
        "attention_main": "bertkit.commands.attention:main",
    },
)
