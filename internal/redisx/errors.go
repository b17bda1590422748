package redisx

import "github.com/redis/go-redis/v9"

// IsGroupMissing reports Redis's NOGROUP answer, which it gives for a
// missing stream as well as a missing group, from a command or a script.
func IsGroupMissing(err error) bool { return redis.HasErrorPrefix(err, "NOGROUP") }

// isNoSuchKey reports XINFO's reply for a missing stream.
func isNoSuchKey(err error) bool { return redis.HasErrorPrefix(err, "no such key") }
