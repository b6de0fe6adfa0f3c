"""SSH twin: each Ethernet switch's CLI (EOS, NX-OS, Junos, Onyx, SONiC, Cumulus) over paramiko."""

from simulator.ssh.twin import FAULTS, SshTwinOptions, start, start_twin

__all__ = ["FAULTS", "SshTwinOptions", "start", "start_twin"]
