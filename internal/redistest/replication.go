package redistest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// WaitReplicated waits until master has a replica and every replica
// attached to it has acknowledged each write master had taken when the
// wait began, as its INFO replication reports them. WAIT would not do: it
// counts the acknowledgements of the calling connection's own last write,
// and a connection that wrote nothing is answered at once, even by a
// replica whose initial sync is still under way.
func WaitReplicated(tb testing.TB, master *redis.Client) {
	tb.Helper()
	if err := waitReplicated(tb.Context(), master); err != nil {
		tb.Fatal(err)
	}
}

func waitReplicated(ctx context.Context, master *redis.Client) error {
	want := int64(-1)
	return eventually(ctx, "replicas acknowledge every write", func(ctx context.Context) error {
		info, err := master.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		if role := infoField(info, "role"); role != "master" {
			return fmt.Errorf("%s is a %s", master.Options().Addr, role)
		}
		offset, err := strconv.ParseInt(infoField(info, "master_repl_offset"), 10, 64)
		if err != nil {
			return fmt.Errorf("master_repl_offset: %w", err)
		}
		if want < 0 {
			want = offset
		}
		n, err := strconv.Atoi(infoField(info, "connected_slaves"))
		if err != nil || n == 0 {
			return errors.New("no replica attached")
		}
		for i := range n {
			line := infoField(info, "slave"+strconv.Itoa(i))
			state, acked := replicaProgress(line)
			if state != "online" || acked < want {
				return fmt.Errorf("replica %q has acknowledged offset %d of %d", line, acked, want)
			}
		}
		return nil
	})
}

// replicaProgress reads one slaveN line of INFO replication
// (ip=…,port=…,state=online,offset=…,lag=…): the replica's state and the
// offset it acknowledged.
func replicaProgress(line string) (state string, acked int64) {
	acked = -1
	for field := range strings.SplitSeq(line, ",") {
		k, v, _ := strings.Cut(field, "=")
		switch k {
		case "state":
			state = v
		case "offset":
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				acked = n
			}
		}
	}
	return state, acked
}
