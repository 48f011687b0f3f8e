package main

import (
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/lash-run/lash/streams"
)

// permFlags are the permissions command's flags.
type permFlags struct {
	sessions, signals, tools, hooks, nodeInbox string
}

var permissionsCmd = &command{
	name:    "permissions",
	summary: "NATS server permissions for lash's roles, as a config snippet",
	doc: `Prints an "authorization" block for nats-server's configuration with one user per role:
lash-node (nodes) and lash-admin (operators), who write durable truth and use the
JetStream API; per session (--sessions) a client, who may send messages to it
(<prefix>.sess.<ID>.in, or the node API's <prefix>.api.sess.<ID>.submit) and read its
status and live events, and an approver, who may decide its suspended calls and cancel
its turns (<prefix>.sess.<ID>.decide, <prefix>.api.sess.<ID>.decide and .cancel) and
read the same; a signal publisher per source type (--signals); a tool server per tool
(--tools), which may also do its calls' durable work (<prefix>.api.step, event_key and
await_event, with the ticket of each call); a hook server per hook agents name
(--hooks, <prefix>.hook.<NAME>). Passwords are environment variables of the server (LASH_PW_<USER>, upper
case): set them, or replace them.

Clients and approvers follow live events as they come (a subscription to
<prefix>.live.<ID>), and read what they missed through the node API
(<prefix>.api.sess.<ID>.live, from a cursor). No client gets the JetStream API:
a pull's messages go to whatever reply subject the puller names. Nodes refuse
node API requests whose reply subject is the deployment's or the server's.

Every user has an inbox prefix of its own, _INBOX_<USER>: run each program with it
(nats.go: nats.CustomInboxPrefix; the nats CLI and lash: --inbox-prefix), so no one
reads another's replies. Nodes and lash-admin share --node-inbox: their replies and
consumer deliveries (every session's inputs) travel where only they may subscribe.
The node API's endpoints without a session in the subject name any session: they are
for trusted programs, so clients get none of them.`,
	flags: func(a *app, fs *flag.FlagSet) {
		fs.StringVar(&a.perm.sessions, "sessions", "SESSION", "comma-separated `ids` of the sessions to make a client user for")
		fs.StringVar(&a.perm.signals, "signals", "", "comma-separated signal source `types` to make a publisher user for")
		fs.StringVar(&a.perm.tools, "tools", "", "comma-separated `names` of tools served over NATS to make a tool-server user for")
		fs.StringVar(&a.perm.hooks, "hooks", "", "comma-separated `names` of hooks served over NATS to make a hook-server user for")
		fs.StringVar(&a.perm.nodeInbox, "node-inbox", "_INBOX_lash", "the inbox `prefix` nodes and lash-admin use (their --inbox-prefix)")
	},
	check: func(a *app, _ []string) error {
		for _, list := range []string{a.perm.sessions, a.perm.signals, a.perm.tools, a.perm.hooks} {
			for _, id := range splitList(list) {
				if err := streams.CheckID(id); err != nil {
					return a.usagef("%v", err)
				}
			}
		}
		return nil
	},
	offline: true,
	run:     runPermissions,
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// permUser is one user of the template.
type permUser struct {
	comment, name  string
	pub, sub       []string
	allowResponses bool
}

// permissionUsers are the template's users for the deployment's prefix.
func permissionUsers(prefix string, f permFlags) ([]permUser, error) {
	users := []permUser{
		{comment: "nodes: durable truth, the JetStream API, their own inboxes (run them with --inbox-prefix " + f.nodeInbox + ")",
			name: "lash-node", pub: []string{">"}, sub: []string{">"}},
		{comment: "operators: lash-admin (run it with --inbox-prefix " + f.nodeInbox + ")",
			name: "lash-admin", pub: []string{">"}, sub: []string{">"}},
	}
	for _, s := range splitList(f.sessions) {
		tok, err := streams.Token(s)
		if err != nil {
			return nil, err
		}
		api := prefix + ".api.sess." + tok + "."
		liveSubj := prefix + ".live." + tok
		users = append(users, permUser{
			comment: fmt.Sprintf("a client of session %s: its messages, its status and live events, its own replies", s),
			name:    "client-" + tok,
			pub:     []string{prefix + ".sess." + tok + ".in", api + "submit", api + "status", api + "live"},
			sub:     []string{liveSubj, userInbox("client-"+tok) + ".>"},
		}, permUser{
			comment: fmt.Sprintf("an approver of session %s: decisions on its suspended calls and cancels, its status and live events, its own replies", s),
			name:    "approver-" + tok,
			pub:     []string{prefix + ".sess." + tok + ".decide", api + "decide", api + "cancel", api + "status", api + "live"},
			sub:     []string{liveSubj, userInbox("approver-"+tok) + ".>"},
		})
	}
	for _, typ := range splitList(f.signals) {
		tok, err := streams.Token(typ)
		if err != nil {
			return nil, err
		}
		users = append(users, permUser{
			comment: "a publisher of " + typ + " signals",
			name:    "signals-" + tok,
			pub:     []string{prefix + ".signal." + tok, prefix + ".signal." + tok + ".>"},
			sub:     []string{userInbox("signals-"+tok) + ".>"},
		})
	}
	for _, tool := range splitList(f.tools) {
		tok, err := streams.Token(tool)
		if err != nil {
			return nil, err
		}
		users = append(users, permUser{
			comment:        "a tool server for " + tool + ": its endpoint, the micro discovery nodes use, its calls' durable work, its own replies",
			name:           "tool-" + tok,
			pub:            []string{"$SRV.>", prefix + ".api.step", prefix + ".api.event_key", prefix + ".api.await_event"},
			sub:            []string{prefix + ".tool." + tok, "$SRV.>", userInbox("tool-"+tok) + ".>"},
			allowResponses: true,
		})
	}
	for _, hook := range splitList(f.hooks) {
		tok, err := streams.Token(hook)
		if err != nil {
			return nil, err
		}
		users = append(users, permUser{
			comment:        "a hook server for " + hook + ": the questions nodes ask it",
			name:           "hook-" + tok,
			sub:            []string{prefix + ".hook." + tok},
			allowResponses: true,
		})
	}
	return users, nil
}

// userInbox is the inbox prefix the template lets user subscribe under.
func userInbox(user string) string { return "_INBOX_" + user }

// envName is the environment variable holding a user's password.
func envName(user string) string {
	var b strings.Builder
	b.WriteString("LASH_PW_")
	for _, r := range strings.ToUpper(user) {
		if r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// permissionsConfig renders users as an authorization block.
func permissionsConfig(prefix string, users []permUser) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# lash permissions for the deployment with prefix %q, from lash-admin permissions.\n", prefix)
	b.WriteString("# Passwords come from the server's environment: set each LASH_PW_* variable.\n")
	b.WriteString("authorization {\n  users = [\n")
	quote := func(list []string) string {
		q := make([]string, len(list))
		for i, s := range list {
			q[i] = fmt.Sprintf("%q", s)
		}
		return "[" + strings.Join(q, ", ") + "]"
	}
	for _, u := range users {
		fmt.Fprintf(&b, "    # %s\n", u.comment)
		fmt.Fprintf(&b, "    {user: %q, password: $%s, permissions: {\n", u.name, envName(u.name))
		fmt.Fprintf(&b, "      publish: {allow: %s}\n", quote(u.pub))
		fmt.Fprintf(&b, "      subscribe: {allow: %s}\n", quote(u.sub))
		if u.allowResponses {
			b.WriteString("      allow_responses: true\n")
		}
		b.WriteString("    }}\n")
	}
	b.WriteString("  ]\n}\n")
	return b.String()
}

func runPermissions(a *app, _ []string) error {
	prefix := a.conn.Streams().Prefix
	if prefix == "" {
		prefix = streams.DefaultPrefix
	}
	users, err := permissionUsers(prefix, a.perm)
	if err != nil {
		return err
	}
	conf := permissionsConfig(prefix, users)
	if a.json {
		type userJSON struct {
			User      string   `json:"user"`
			Password  string   `json:"password_env"`
			Publish   []string `json:"publish"`
			Subscribe []string `json:"subscribe"`
			Responses bool     `json:"allow_responses,omitempty"`
		}
		out := struct {
			Users  []userJSON `json:"users"`
			Config string     `json:"config"`
		}{Config: conf}
		for _, u := range users {
			out.Users = append(out.Users, userJSON{u.name, envName(u.name), u.pub, u.sub, u.allowResponses})
		}
		return a.emit(out, nil)
	}
	_, err = io.WriteString(a.stdout, conf)
	return err
}
