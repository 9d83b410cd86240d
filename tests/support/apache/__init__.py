"""Apache Pulsar's own broker and Java client as test peers (the `apache` tier).

Input:  the project files beside this module: broker.pom.xml and client.pom.xml (the Maven
        artifacts, one version), settings.xml (Maven Central only), ApacheClient.java (our
        program driving the official Java client).
Output: maven.py fetches the jars and compiles the program into a cache folder kept between
        sessions; broker.py runs one standalone broker on free loopback ports; client.py runs
        the program against it and returns the client's own JSON record.
Rule:   everything is fetched only when missing from the cache (keyed by the files' content),
        under a lock, so concurrent sessions share one copy; only loopback is used, and only
        the processes started here are stopped, by their PID (docs/development.md, "The Apache
        broker peer").
"""
