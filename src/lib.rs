//! agentd: a daemon that lets a vision model operate a computer.
