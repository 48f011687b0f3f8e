package cli

import (
	"bytes"
	"flag"
	"fmt"
	neturl "net/url"
	"os"
	"strings"
	"time"

	"github.com/lash-run/lash/streams"
	"github.com/nats-io/nats.go"
)

// Conn is how a command reaches NATS, and which deployment it works on.
type Conn struct {
	URL      string
	Creds    string
	User     string
	Password string
	TLSCert  string
	TLSKey   string
	TLSCA    string
	Prefix   string
	Replicas int
	// InboxPrefix, if set, replaces _INBOX for this process's replies
	// and consumer deliveries, so permissions can keep them from others.
	InboxPrefix string
}

// Register defines the connection flags on fs. Empty URL means the
// command's own default (lash-node starts an embedded server).
func (c *Conn) Register(fs *flag.FlagSet, urlHelp string) {
	fs.StringVar(&c.URL, "nats", "", urlHelp)
	fs.StringVar(&c.Creds, "creds", "", "NATS credentials `file`: a user JWT with its seed, or a bare nkey seed (SU...)")
	fs.StringVar(&c.User, "user", "", "NATS `user`")
	fs.StringVar(&c.Password, "password", "", "NATS `password`")
	fs.StringVar(&c.TLSCert, "tls-cert", "", "client certificate `file` for TLS")
	fs.StringVar(&c.TLSKey, "tls-key", "", "client key `file` for TLS")
	fs.StringVar(&c.TLSCA, "tls-ca", "", "CA certificate `file` to verify the server")
	fs.StringVar(&c.Prefix, "prefix", streams.DefaultPrefix, "subject prefix and stream name `prefix` of the deployment")
	fs.IntVar(&c.Replicas, "replicas", 1, "`replicas` of every stream and bucket (1 on one server, 3 in a cluster)")
	fs.StringVar(&c.InboxPrefix, "inbox-prefix", "", "subject `prefix` of this process's reply inboxes and consumer deliveries instead of _INBOX, so NATS permissions can keep them from other clients (e.g. _INBOX_lash_nodes)")
}

// Aliases are the extra environment names the connection flags read.
func (c *Conn) Aliases() map[string][]string { return map[string][]string{"nats": {"NATS_URL"}} }

// Validate checks the settings that need no server.
func (c *Conn) Validate() error {
	// The stream layer takes zero values for its defaults; given on the
	// command line they are mistakes.
	switch {
	case c.Prefix == "":
		return fmt.Errorf("%w: --prefix cannot be empty (the default is %s)", ErrUsage, streams.DefaultPrefix)
	case c.Replicas < 1:
		return fmt.Errorf("%w: --replicas %d: must be 1 to 5", ErrUsage, c.Replicas)
	}
	if err := c.Streams().Validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrUsage, err)
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return fmt.Errorf("%w: --tls-cert and --tls-key go together", ErrUsage)
	}
	if c.Creds != "" && c.User != "" {
		return fmt.Errorf("%w: give --creds or --user, not both", ErrUsage)
	}
	if c.InboxPrefix != "" {
		for _, tok := range strings.Split(c.InboxPrefix, ".") {
			if tok == "" || strings.ContainsAny(tok, "*> \t\r\n") {
				return fmt.Errorf("%w: --inbox-prefix %q: subject tokens without wildcards or spaces", ErrUsage, c.InboxPrefix)
			}
		}
	}
	return nil
}

// InboxOptions are the nats.go options for the inbox prefix, if any.
func (c *Conn) InboxOptions() []nats.Option {
	if c.InboxPrefix == "" {
		return nil
	}
	return []nats.Option{nats.CustomInboxPrefix(c.InboxPrefix)}
}

// Streams is the deployment's stream configuration.
func (c *Conn) Streams() streams.Config {
	return streams.Config{Prefix: c.Prefix, Replicas: c.Replicas}
}

// Options are the nats.go options the settings ask for.
func (c *Conn) Options(name string) []nats.Option {
	opts := append([]nats.Option{nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(250 * time.Millisecond)}, c.InboxOptions()...)
	if c.Creds != "" {
		opts = append(opts, credsOption(c.Creds))
	}
	if c.User != "" {
		opts = append(opts, nats.UserInfo(c.User, c.Password))
	}
	if c.TLSCert != "" {
		opts = append(opts, nats.ClientCert(c.TLSCert, c.TLSKey))
	}
	if c.TLSCA != "" {
		opts = append(opts, nats.RootCAs(c.TLSCA))
	}
	return opts
}

// Connect dials url (c.URL when empty) with the settings, then extra
// (a ClosedHandler, say).
func (c *Conn) Connect(name, url string, extra ...nats.Option) (*nats.Conn, error) {
	if url == "" {
		url = c.URL
	}
	nc, err := nats.Connect(url, append(c.Options(name), extra...)...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w", Redact(url), err)
	}
	return nc, nil
}

// Redact hides the secrets of a NATS URL list (comma-separated) for
// errors and logs: a password, or a user part with no password (nats.go
// takes that for a token). A URL that does not parse is not shown.
func Redact(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		p = strings.TrimSpace(p)
		u, err := neturl.Parse(p)
		switch {
		case err != nil:
			parts[i] = "(a URL that does not parse)"
		case u.User == nil:
			parts[i] = p
		default:
			if _, ok := u.User.Password(); ok {
				u.User = neturl.UserPassword(u.User.Username(), "xxxxx")
			} else {
				u.User = neturl.User("xxxxx")
			}
			parts[i] = u.String()
		}
	}
	return strings.Join(parts, ",")
}

// credsOption signs in with a credentials file (a user JWT and its nkey
// seed), or with a bare nkey seed file (a user of a server configured
// with nkeys).
func credsOption(path string) nats.Option {
	b, err := os.ReadFile(path)
	if err == nil && bytes.HasPrefix(bytes.TrimSpace(b), []byte("SU")) && !bytes.Contains(b, []byte("BEGIN NATS USER JWT")) {
		if opt, err := nats.NkeyOptionFromSeed(path); err == nil {
			return opt
		}
	}
	// A credentials file, or one that is neither: nats.go says what is
	// wrong with it when it connects.
	return nats.UserCredentials(path)
}
