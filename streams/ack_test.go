package streams

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestParseAck(t *testing.T) {
	for _, c := range []struct {
		in   string
		want *jetstream.PubAck
		code jetstream.ErrorCode
	}{
		{in: `{"stream":"LASH_FX","seq":12}`, want: &jetstream.PubAck{Stream: "LASH_FX", Sequence: 12}},
		{in: `{"stream":"S","seq":18446744073709551615,"duplicate":true}`, want: &jetstream.PubAck{Stream: "S", Sequence: 1<<64 - 1, Duplicate: true}},
		{in: `{"stream":"S","seq":4,"duplicate": true}`, want: &jetstream.PubAck{Stream: "S", Sequence: 4, Duplicate: true}},
		{in: `{"stream":"S","seq":3,"domain":"hub"}`, want: &jetstream.PubAck{Stream: "S", Sequence: 3, Domain: "hub"}},
		{in: `{"stream":"S\"x","seq":3}`, want: &jetstream.PubAck{Stream: `S"x`, Sequence: 3}},
		{in: `{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 5"},"stream":"S","seq":0}`, code: 10071},
		{in: `{"error":{"code":503,"err_code":10077,"description":"resource limits exceeded for account"}}`, code: 10077},
		{in: `{"stream":"","seq":1}`},
		{in: `{"stream":"S","seq":}`},
		{in: `{"stream":"S","seq":99999999999999999999}`},
		{in: `not json`},
		{in: ``},
	} {
		got, err := parseAck([]byte(c.in))
		switch {
		case c.want != nil:
			if err != nil || *got != *c.want {
				t.Errorf("%s: %+v, %v; want %+v", c.in, got, err, c.want)
			}
		case c.code != 0:
			if apiCode(err) != c.code {
				t.Errorf("%s: %+v, %v; want code %d", c.in, got, err, c.code)
			}
		default:
			if !errors.Is(err, jetstream.ErrInvalidJSAck) {
				t.Errorf("%s: %+v, %v; want an invalid ack", c.in, got, err)
			}
		}
	}
}

// What the hand-read ack takes, encoding/json reads alike.
func FuzzPlainAck(f *testing.F) {
	f.Add(`{"stream":"S","seq":1}`)
	f.Add(`{"stream":"S","seq":7,"duplicate":true}`)
	f.Add(`{"stream":"S","seq":7,"duplicate": true}`)
	f.Fuzz(func(t *testing.T, in string) {
		got, ok := plainAck(in)
		if !ok {
			return
		}
		var want jetstream.PubAck
		if err := json.Unmarshal([]byte(in), &want); err != nil || want != *got {
			t.Fatalf("%q: read %+v by hand, %+v (%v) by json", in, got, want, err)
		}
	})
}

// The acks a server writes for a write and for its repeat are the ones
// read by hand.
func TestServerAcksAreReadByHand(t *testing.T) {
	srv, err := StartEmbedded(EmbeddedConfig{StoreDir: t.TempDir(), Listen: "none", NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "ACKS", Subjects: []string{"acks.>"}}); err != nil {
		t.Fatal(err)
	}
	for i, want := range []jetstream.PubAck{{Stream: "ACKS", Sequence: 1}, {Stream: "ACKS", Sequence: 1, Duplicate: true}} {
		m := nats.NewMsg("acks.a")
		m.Header.Set(jetstream.MsgIDHeader, "one")
		reply, err := nc.RequestMsg(m, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if got, ok := plainAck(string(reply.Data)); !ok || *got != want {
			t.Fatalf("write %d: ack %s read by hand as %+v, %v; want %+v", i, reply.Data, got, ok, want)
		}
	}
}
