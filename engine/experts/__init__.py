"""Experts: mixture-of-experts streaming -- the expert cache policies (expert_cache), routed
loads at the router's top-k node (expert_streaming), ExpertRun, the map view, routing traces
and their offline replay.
"""

__all__ = ['expert_cache', 'expert_run', 'expert_streaming', 'expert_view', 'routing_trace', 'replay']
