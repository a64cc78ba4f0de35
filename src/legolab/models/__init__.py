"""Models: BERT/ALBERT-style encoders with swappable attention and TransformerLens-style hooks."""

from .attention import ActivationCache, Context, SelfAttention
from .encoder import Encoder, ModelConfig, TokenClassifier, build_model

__all__ = ["ActivationCache", "Context", "Encoder", "ModelConfig", "SelfAttention", "TokenClassifier", "build_model"]
