"""shardscope engine, pure Python with no Qt import, in rooms by idea. Each room imports only
rooms ranked below it (tests/test_layering.py enforces the order):

    base < layout, synth < knobs < measure < stream < experts < devices < output < runs
         < search < cli
"""
