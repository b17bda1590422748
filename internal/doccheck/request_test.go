package doccheck

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	pelwardenv1 "github.com/pelwarden/pelwarden/proto/pelwarden/v1"
)

// The Admin API's messages stay out of the package itself, so the chart
// module, which imports it, need not build gRPC.

// Request unmarshals a `json request` example strictly (no unknown field)
// into the Admin API request message it names, such as
// pelwarden.v1.ReclaimRequest, or, when it names none, into any request
// message that takes it.
func Request(message, body string) error {
	msgs := pelwardenv1.File_pelwarden_v1_admin_proto.Messages()
	if message != "" {
		d := msgs.ByName(protoreflect.FullName(message).Name())
		if d == nil || d.FullName() != protoreflect.FullName(message) {
			return fmt.Errorf("%s is not a message of pelwarden.v1", message)
		}
		return unmarshal(d, body)
	}
	var tried []string
	for i := range msgs.Len() {
		d := msgs.Get(i)
		if !strings.HasSuffix(string(d.Name()), "Request") {
			continue
		}
		if unmarshal(d, body) == nil {
			return nil
		}
		tried = append(tried, string(d.Name()))
	}
	return fmt.Errorf("no request message takes it (tried %s); name the message after `json request`", strings.Join(tried, ", "))
}

func unmarshal(d protoreflect.MessageDescriptor, body string) error {
	mt, err := protoregistry.GlobalTypes.FindMessageByName(d.FullName())
	if err != nil {
		return err
	}
	m := mt.New().Interface()
	if err := protojson.Unmarshal([]byte(body), m); err != nil {
		return fmt.Errorf("%s: %w", d.FullName(), err)
	}
	return nil
}
