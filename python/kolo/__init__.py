"""kolo: data-parallel training across processes and hosts.

`import kolo.torch as hvd` gives Horovod's horovod.torch API on kolo's engine.
"""

__version__ = '0.1.0'
