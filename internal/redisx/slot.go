package redisx

import "strings"

// slots is the number of hash slots of a Redis Cluster.
const slots = 16384

// HashSlot is the Redis Cluster hash slot of key: CRC16 (XMODEM) of the
// key's hash tag, the part between its first '{' and the first '}' after
// it when that part is not empty, else of the whole key. go-redis computes
// the same in an internal package it does not export.
func HashSlot(key string) int {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if n := strings.IndexByte(key[open+1:], '}'); n > 0 {
			key = key[open+1 : open+1+n]
		}
	}
	return int(crc16(key)) % slots
}

// SameSlot reports whether a script may touch both keys under Redis
// Cluster.
func SameSlot(a, b string) bool { return HashSlot(a) == HashSlot(b) }

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0), the
// checksum the Redis Cluster specification names.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
