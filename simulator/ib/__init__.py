"""InfiniBand twins: generated ibnetdiscover text, ibsim topologies and the UFM REST twin."""
