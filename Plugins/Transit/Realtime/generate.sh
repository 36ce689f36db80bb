#!/usr/bin/env bash
# Regenerates gtfs-realtime.pb.swift from gtfs-realtime.proto.
#
# Only needed when the .proto changes (or when moving to another swift-protobuf
# version). The generated Swift file is committed, so building the project
# never needs protoc or this script.
#
# Run from the repository root:
#   Plugins/Transit/Realtime/generate.sh
#
# Environment (all optional):
#   SWIFT_PROTOBUF_VERSION  swift-protobuf tag to build protoc-gen-swift from
#                           (default 1.39.0; must match the SwiftProtobuf
#                           version in Package.swift)
#   PROTOC_GEN_SWIFT        path to an already built protoc-gen-swift of that
#                           version (skips the clone and build)
#   UPDATE_PROTO=1          first replace gtfs-realtime.proto with the newest
#                           one from github.com/google/transit
#                           (gtfs-realtime/proto/gtfs-realtime.proto)
#
# Steps: install protoc (Debian/Ubuntu: apt-get install protobuf-compiler) if
# missing, build protoc-gen-swift in a temporary directory, run protoc.
set -euo pipefail

SWIFT_PROTOBUF_VERSION="${SWIFT_PROTOBUF_VERSION:-1.39.0}"
OUT_DIR="Plugins/Transit/Realtime"
PROTO="gtfs-realtime.proto"

if [[ ! -f "$OUT_DIR/$PROTO" ]]; then
    echo "error: run from the repository root ($OUT_DIR/$PROTO not found)" >&2
    exit 1
fi

# 1. protoc
if ! command -v protoc >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1; then
        SUDO=""
        [[ "$(id -u)" -ne 0 ]] && SUDO="sudo"
        $SUDO apt-get install -y protobuf-compiler
    else
        echo "error: protoc not found; install protobuf-compiler (e.g. brew install protobuf)" >&2
        exit 1
    fi
fi

WORK_DIR="$(mktemp -d "${TMPDIR:-/tmp}/gtfs-rt-gen.XXXXXX")"
trap 'rm -rf "$WORK_DIR"' EXIT

# 2. protoc-gen-swift, built outside the repository
if [[ -z "${PROTOC_GEN_SWIFT:-}" ]]; then
    git clone --quiet --depth 1 --branch "$SWIFT_PROTOBUF_VERSION" \
        https://github.com/apple/swift-protobuf "$WORK_DIR/swift-protobuf"
    (cd "$WORK_DIR/swift-protobuf" &&
        nice swift build -c release --product protoc-gen-swift)
    PROTOC_GEN_SWIFT="$WORK_DIR/swift-protobuf/.build/release/protoc-gen-swift"
fi
PLUGIN_VERSION="$("$PROTOC_GEN_SWIFT" --version)"
if [[ "$PLUGIN_VERSION" != "protoc-gen-swift $SWIFT_PROTOBUF_VERSION" ]]; then
    echo "error: $PROTOC_GEN_SWIFT is '$PLUGIN_VERSION', expected $SWIFT_PROTOBUF_VERSION" >&2
    exit 1
fi

# 3. (optional) refresh the official proto; keep its licence header as is
if [[ "${UPDATE_PROTO:-0}" == "1" ]]; then
    git clone --quiet --depth 1 https://github.com/google/transit "$WORK_DIR/transit"
    cp "$WORK_DIR/transit/gtfs-realtime/proto/$PROTO" "$OUT_DIR/$PROTO"
fi

# 4. generate
echo "$(protoc --version), $PLUGIN_VERSION"
protoc \
    --plugin=protoc-gen-swift="$PROTOC_GEN_SWIFT" \
    --proto_path="$OUT_DIR" \
    --swift_out="$OUT_DIR" \
    --swift_opt=Visibility=Internal \
    "$OUT_DIR/$PROTO"
echo "wrote $OUT_DIR/gtfs-realtime.pb.swift"
