# Cython declarations for enforcement.py (pure-Python mode: that file is the source and the pure twin): one broker's
# enforcement as an extension type, so that the compiled connection core (connection.pxd cimports this) reads the
# facts it asks after every response (a promotion's switch time, a running shadow set, whether network time is
# metered) as C fields, not as Python attribute lookups.

cdef class Enforcement:
    cdef public object config, managers, excluded, _excluded_usage, shadow, shadow_id, switch, throttled
    cdef public object no_throttle, produce_limited, produce, fetch
    cdef public long long switch_ms
    cdef public bint _network_live, network_metered
