#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// The gateway's fuzz targets in one libFuzzer program: `FUZZ_TARGET=<name>` picks the target, the
// arguments are libFuzzer's (a corpus folder, -max_total_time=…). Fuzz/run builds and runs them;
// Fuzz/README.md says how.

/// libFuzzer's driver, for a program that has a `main` of its own (the archive without `main` is linked).
@_silgen_name("LLVMFuzzerRunDriver")
func LLVMFuzzerRunDriver(
    _ argc: UnsafeMutablePointer<CInt>, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
    _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt
) -> CInt

let name = getenv("FUZZ_TARGET").map { String(cString: $0) } ?? ""
guard let selected = FuzzTargets.all[name] else {
    let names = FuzzTargets.all.keys.sorted().joined(separator: ", ")
    print("gateway-fuzz: set FUZZ_TARGET to one of: \(names)")
    exit(2)
}
FuzzTargets.selected = selected

var argc = CommandLine.argc
var argv = Optional(CommandLine.unsafeArgv)
exit(LLVMFuzzerRunDriver(&argc, &argv) { start, count in
    FuzzTargets.selected?(UnsafeBufferPointer(start: start, count: start == nil ? 0 : count))
    return 0
})
