"""A volume setting between 0 and 100."""

from bounds import clamp

MIN_VOLUME = 0
MAX_VOLUME = 100


def set_volume(level):
    return clamp(level, MIN_VOLUME, MAX_VOLUME)
