"""Model providers: where a turn's model call goes."""
