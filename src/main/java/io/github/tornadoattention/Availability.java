package io.github.tornadoattention;

/**
 * Whether a backend can run here. When available, {@code detail} names the device(s); when not,
 * it says why (no TornadoVM, no driver, ...).
 */
public record Availability(boolean available, String detail) {

    public static Availability available(String devices) {
        return new Availability(true, devices);
    }

    public static Availability unavailable(String reason) {
        return new Availability(false, reason);
    }
}
