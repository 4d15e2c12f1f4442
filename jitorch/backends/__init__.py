"""Device backends: what runs ops and kernels on a device whose memory is not the host's.

Each registers itself for its device type (``runtime.device.DEVICE_BACKENDS``) when imported;
``import jitorch`` imports them all. `cuda` is the one there is.
"""
