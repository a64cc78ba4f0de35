"""Models: BERT/ALBERT-style encoders with swappable attention and TransformerLens-style hooks.

Every module of this package is imported here, so an attention variant is one new file that
registers its factory with ``@register_attention`` (as ``lego_attention.py`` does).
"""

import importlib
import pkgutil

from .attention import ActivationCache, Context, SelfAttention
from .encoder import Encoder, ModelConfig, TokenClassifier, build_model

__all__ = ["ActivationCache", "Context", "Encoder", "ModelConfig", "SelfAttention", "TokenClassifier", "build_model"]

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
