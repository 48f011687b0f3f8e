package nodeapi_test

import (
	"context"
	"fmt"
	"log"

	"github.com/lash-run/lash/nodeapi"
	"github.com/nats-io/nats.go"
)

// A client sends a message to a session through whichever node answers,
// and reads the session's head back.
func ExampleClient() {
	nc, err := nats.Connect(nats.DefaultURL) // the embedded server of a lash-node
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	c := nodeapi.NewClient(nc, "lash")
	ctx := context.Background()
	acc, err := c.Submit(ctx, nodeapi.SubmitRequest{Session: "support-42", Key: "msg-1", Text: "Where is my order?"})
	if err != nil {
		log.Fatal(err)
	}
	st, err := c.Status(ctx, "support-42")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(acc.Seq <= st.LastInput, len(st.Pending), "inputs wait for a turn")
}
