//! Simulated connections that behave like TCP as Algorithm 3 needs it: a directed link numbers
//! its messages per connection (a connection lives as long as both ends' incarnations); the
//! receiver accepts them in order, drops duplicates, and treats a gap (a lost or overtaken
//! message) or a new connection as a broken link, after which the old connection's stragglers
//! are dropped.

/// The connection between two incarnations: (sender's, receiver's).
pub type Connection = (u32, u32);

/// What the receiver makes of one arriving message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arrival {
    /// Deliver it.
    Deliver,
    /// The link broke (messages may be lost): report that, then deliver it.
    BrokenThenDeliver,
    /// Drop it (a duplicate, or from a dead connection).
    Drop,
}

/// Both ends' view of one directed link.
#[derive(Default, Clone, Copy, Debug)]
pub struct Link {
    send_connection: Connection,
    sent: u64,
    receive_connection: Connection,
    expected: u64,
}

impl Link {
    /// Numbers the next message sent on `connection`.
    pub fn send(&mut self, connection: Connection) -> u64 {
        if self.send_connection != connection {
            self.send_connection = connection;
            self.sent = 0;
        }
        self.sent += 1;
        self.sent - 1
    }

    /// Judges message `seq` of `connection` arriving while `current` is the live connection.
    pub fn receive(&mut self, connection: Connection, current: Connection, seq: u64) -> Arrival {
        // A connection dies with a restart of either side: what it still carries is gone.
        if connection != current {
            return Arrival::Drop;
        }
        let new_connection = self.receive_connection != connection;
        if new_connection {
            self.receive_connection = connection;
            self.expected = 0;
        }
        if seq < self.expected {
            return Arrival::Drop;
        }
        let broken = seq > self.expected || new_connection;
        self.expected = seq + 1;
        if broken {
            Arrival::BrokenThenDeliver
        } else {
            Arrival::Deliver
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_duplicates_and_new_connections() {
        let mut link = Link::default();
        let c = (1, 1);
        assert_eq!(link.send(c), 0);
        assert_eq!(link.send(c), 1);
        assert_eq!(link.send(c), 2);
        // A new connection reports a break first, as the node's transport does.
        assert_eq!(link.receive(c, c, 0), Arrival::BrokenThenDeliver);
        assert_eq!(link.receive(c, c, 0), Arrival::Drop);
        assert_eq!(link.receive(c, c, 1), Arrival::Deliver);
        assert_eq!(link.send(c), 3);
        assert_eq!(link.receive(c, c, 3), Arrival::BrokenThenDeliver);
        assert_eq!(link.receive(c, c, 2), Arrival::Drop);
        let d = (1, 2);
        assert_eq!(link.receive(c, d, 4), Arrival::Drop);
        assert_eq!(link.send(d), 0);
        assert_eq!(link.receive(d, d, 0), Arrival::BrokenThenDeliver);
        assert_eq!(link.receive(d, d, 1), Arrival::Deliver);
    }
}
