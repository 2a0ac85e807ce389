package perfctl.server;

import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import java.io.IOException;
import java.util.HashMap;
import java.util.Map;
import org.springframework.boot.SpringApplication;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.context.annotation.Bean;
import org.springframework.web.bind.annotation.GetMapping;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestMapping;
import org.springframework.web.bind.annotation.RestController;

/**
 * `impl: java, model: spring`: Spring Boot MVC on its default embedded container (Tomcat, at the
 * version Spring Boot manages). The endpoints are @RestController handler methods reached
 * through the DispatcherServlet; they answer through the same Router as the other Java servers
 * (Stack), so what differs from `servlet` is Spring's dispatch, filters and handler mapping.
 * --threads, --backlog and --idle-timeout-ms go to Tomcat's connector (ServletMain.configure).
 */
@SpringBootApplication
public class SpringMain {
    static Stack stack;

    /** The endpoints, each its own handler method (a catch-all answers 404 and 405). */
    @RestController
    static class Endpoints {
        @GetMapping("/health")
        public void health(HttpServletRequest req, HttpServletResponse resp) throws IOException {
            stack.serve(req, resp, System.nanoTime());
        }

        @GetMapping("/work")
        public void work(HttpServletRequest req, HttpServletResponse resp) throws IOException {
            stack.serve(req, resp, System.nanoTime());
        }

        @GetMapping("/search")
        public void search(HttpServletRequest req, HttpServletResponse resp) throws IOException {
            stack.serve(req, resp, System.nanoTime());
        }

        @GetMapping("/stats")
        public void stats(HttpServletRequest req, HttpServletResponse resp) throws IOException {
            stack.serve(req, resp, System.nanoTime());
        }

        @GetMapping("/db")
        public void db(HttpServletRequest req, HttpServletResponse resp) throws IOException {
            stack.serve(req, resp, System.nanoTime());
        }

        @PostMapping("/register")
        public void register(HttpServletRequest req, HttpServletResponse resp) throws IOException {
            stack.serve(req, resp, System.nanoTime());
        }

        @PostMapping({"/swipe/{direction}", "/swipe/{direction}/"})
        public void swipe(HttpServletRequest req, HttpServletResponse resp) throws IOException {
            stack.serve(req, resp, System.nanoTime());
        }

        @RequestMapping("/**")
        public void other(HttpServletRequest req, HttpServletResponse resp) throws IOException {
            stack.serve(req, resp, System.nanoTime());
        }
    }

    @Bean
    TomcatTuning tomcatTuning() {
        return new TomcatTuning(stack);
    }

    public static void main(String[] args) {
        stack = Stack.start(args, "spring");
        Config c = stack.config;
        Map<String, Object> props = new HashMap<>();
        props.put("server.port", c.port);
        props.put("server.address", c.host);
        props.put("spring.main.banner-mode", "off");
        props.put("spring.main.log-startup-info", "false");
        props.put("logging.level.root", "WARN");
        props.put("spring.mvc.formcontent.filter.enabled", "false");
        props.put("server.error.whitelabel.enabled", "false");
        SpringApplication app = new SpringApplication(SpringMain.class);
        app.setDefaultProperties(props);
        ConfigurableApplicationContext ctx = app.run(); // our flags are no Spring properties
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            System.out.flush();
            System.err.flush();
            Runtime.getRuntime().halt(0); // SIGTERM / SIGINT: status 0 at once
        }, "shutdown"));
        String port = ctx.getEnvironment().getProperty("local.server.port");
        stack.announce(port == null ? c.port : Integer.parseInt(port));
    }
}
