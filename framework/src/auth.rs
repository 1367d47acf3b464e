//! Authentication added while the client runs (ZooKeeper's `addAuthInfo`).

use crate::client::Client;
use crate::error::{Error, ErrorCode, Result};
use crate::ops::wire_exists;

impl Client {
    /// Authenticates the session as `scheme`/`auth` now, and on every later
    /// connection and session, as if given to
    /// [`ClientBuilder::authorization`](crate::ClientBuilder::authorization)
    /// (ZooKeeper's `addAuthInfo`). Returns once the server has taken it:
    /// requests made after this call run with the new identity.
    ///
    /// The server rejects only schemes it does not know (a digest
    /// `user:password` is always taken: it is checked against ACLs, not at
    /// login). A rejected auth ends the session as a rejected builder auth
    /// does (the call fails with `AuthFailed`, naming the scheme, and so do
    /// calls until the client has a new session); it is not sent again.
    ///
    /// ```no_run
    /// # fn f(client: &latchkey_framework::Client) -> latchkey_framework::Result<()> {
    /// client.add_auth("digest", b"alice:secret")?;
    /// // Nodes with a `digest:alice:...` ACL are now readable.
    /// # Ok(()) }
    /// ```
    pub fn add_auth(&self, scheme: &str, auth: &[u8]) -> Result<()> {
        if scheme.is_empty() {
            return Err(Error::InvalidArgument(
                "add_auth: the scheme is empty".into(),
            ));
        }
        let list = &self.shared.cfg.wire.auth;
        {
            let mut list = list.lock();
            if !list.iter().any(|(s, a)| s == scheme && a == auth) {
                list.push((scheme.to_owned(), auth.to_vec()));
            }
        }
        let result = self.retrying("add_auth", scheme, |s, deadline| {
            // A reconnect meanwhile sends it in its handshake; twice is harmless.
            s.send_auth(scheme, auth)?;
            // The server takes auth on arrival, before any later request:
            // once this is answered, the auth is in force (or the session
            // is over, if it was rejected).
            wire_exists(s, "/", None, deadline).map(|_| ())
        });
        if let Err(e) = &result {
            if e.is(ErrorCode::AuthFailed) {
                list.lock().retain(|(s, a)| !(s == scheme && a == auth));
            }
        }
        result
    }
}
