package io.github.tornadoattention;

/**
 * A bad input: names the argument, the value it had and what is allowed. Thrown before anything
 * is written, so a caller's buffers are never half-updated.
 */
public class InvalidArgumentException extends IllegalArgumentException {
    private final String argument;
    private final String value;
    private final String allowed;

    public InvalidArgumentException(String argument, Object value, String allowed) {
        super(argument + " = " + value + ": " + allowed);
        this.argument = argument;
        this.value = String.valueOf(value);
        this.allowed = allowed;
    }

    /** The argument's name as the API spells it, e.g. {@code kvHeads}. */
    public String argument() {
        return argument;
    }

    public String value() {
        return value;
    }

    public String allowed() {
        return allowed;
    }

    /** Throws if {@code value} is null. */
    public static <T> T requireNonNull(String argument, T value) {
        if (value == null) {
            throw new InvalidArgumentException(argument, null, "must not be null");
        }
        return value;
    }
}
