//! TS 29.244 §6.4 reliable delivery: response cache and retransmission of our requests.
